"""Symmetric level-2 BLAS (dsymv, dsyr) called through ctypes, so the GIL is released while they run.

scipy's f2py wrappers hold the GIL for the whole call; an RLS update at d=4096 would then stall the
predictor thread of `OnlineService` for the update's duration. The same OpenBLAS routines, reached via
scipy's `cython_blas` capsules and ctypes (which drops the GIL around foreign calls), do not.
Falls back to `scipy.linalg.blas` if the capsules are unavailable. Matrices: Fortran-ordered float64,
upper triangle referenced.
"""

from __future__ import annotations

import ctypes

import numpy as np
from scipy.linalg import blas as _scipy_blas

_P = ctypes.c_void_p  # every BLAS argument is a pointer; passing raw addresses keeps the call cheap


def _load() -> tuple[object, object] | None:
    try:
        from scipy.linalg import cython_blas

        caps = cython_blas.__pyx_capi__
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        name = ctypes.pythonapi.PyCapsule_GetName
        name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]

        def fn(key: str, n_args: int) -> object:
            return ctypes.CFUNCTYPE(None, ctypes.c_char_p, *[_P] * (n_args - 1))(
                get(caps[key], name(caps[key]))
            )

        return fn("dsymv", 10), fn("dsyr", 7)
    except (AttributeError, KeyError, TypeError, ValueError, ImportError):  # pragma: no cover
        return None


_FNS = _load()
GIL_FREE = _FNS is not None
_ONE, _ZERO, _INC = ctypes.c_double(1.0), ctypes.c_double(0.0), ctypes.c_int(1)
_A_ONE, _A_ZERO, _A_INC = (ctypes.addressof(c) for c in (_ONE, _ZERO, _INC))
_N: dict[int, ctypes.c_int] = {}


def _n(n: int) -> int:
    if n not in _N:
        _N[n] = ctypes.c_int(n)
    return ctypes.addressof(_N[n])


def symv(M: np.ndarray, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """M x for symmetric M (upper triangle); x and out contiguous float64."""
    if _FNS is None:
        return _scipy_blas.dsymv(1.0, M, x)
    n = M.shape[0]
    y = np.empty(n) if out is None else out
    an = _n(n)
    _FNS[0](b"U", an, _A_ONE, M.ctypes.data, an, x.ctypes.data, _A_INC, _A_ZERO, y.ctypes.data, _A_INC)
    return y


def syr(alpha: float, u: np.ndarray, M: np.ndarray) -> np.ndarray:
    """M ← M + alpha u uᵀ in place (upper triangle); returns M."""
    if _FNS is None or not M.flags.f_contiguous:
        return _scipy_blas.dsyr(alpha, u, a=M, overwrite_a=1)
    a = ctypes.c_double(alpha)
    an = _n(M.shape[0])
    _FNS[1](b"U", an, ctypes.addressof(a), u.ctypes.data, _A_INC, M.ctypes.data, an)
    return M
