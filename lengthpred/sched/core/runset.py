"""The running batch, and which running request to preempt: the one with the worst (largest) key.

Both implementations answer the same question the same way: the largest key among running requests
(optionally only those still under their preemption cap), ties to the lowest slot, where slots are the
compact positions the running requests hold (a finishing or preempted request's slot is taken by the
last one). The slot tie-break is the original simulator's `argmax` over its slot arrays, kept so that
results do not depend on which implementation ran (tests/test_sched_golden.py pins them).

- `HeapRunSet` (when the policy describes its keys with `Policy.segment`): running requests sit in lazy
  max-heaps, one per (key group, capped). Within a group every key moves by the group's slope per global
  step, so the heap order is fixed while a request stays in the group; in a *bound* group (keys that
  fall at per-request rates: LAPS-SD, SRPT under speculative decoding) the slope only bounds the change
  from above, and a query refreshes heap tops to their exact keys until the top is exact. A request
  changes group at a step its policy names (an MLFQ level boundary, SRPT outliving its prediction),
  handled lazily when the next query reaches that step. A query computes exact keys (the policy's
  `running_key`, the same float operations as its vectorised keys) only for entries within rounding of
  the best: O(log B) per query instead of O(B) numpy work, and usually one exact key.
- `SlotRunSet`: keys of the whole batch recomputed with numpy at each query (`Policy.running_keys`), for
  policies without that description (SRPT over a predictor with its own `remaining`).
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from lengthpred.sched.core.policies import Policy

_REL = 1e-13  # candidates within this relative distance of the best approximate key get exact keys (rounding
# moves an approximate key by a few units of 1e-16 relative to the magnitudes it sums)


class _Base:
    """Slot bookkeeping shared by both implementations; the simulator owns the per-request state lists."""

    def __init__(self, policy: Policy, state: tuple[list, list, list, list, list], arrival: list[float],
                 aging: float, limit: float, max_batch: int) -> None:
        self.G0, self.steps0, self.tok0, self.rate, self.npre = state
        self.arr, self.aging, self.limit = arrival, aging, limit
        self.policy = policy
        self.pos = [-1] * len(arrival)
        self.slots: list[int] = []

    def __len__(self) -> int:
        return len(self.slots)

    def _slot_add(self, i: int) -> None:
        self.pos[i] = len(self.slots)
        self.slots.append(i)

    def _slot_remove(self, i: int) -> int:
        """Frees i's slot, moving the last request into it; returns the slot."""
        slots, pos = self.slots, self.pos
        k, j = pos[i], slots.pop()
        if j != i:
            slots[k] = j
            pos[j] = k
        pos[i] = -1
        return k


class HeapRunSet(_Base):
    def __init__(self, policy: Policy, state: tuple[list, list, list, list, list], arrival: list[float],
                 aging: float, limit: float, max_batch: int) -> None:
        super().__init__(policy, state, arrival, aging, limit, max_batch)
        slopes = list(policy.slopes)
        bounds = list(policy.bounds or [False] * len(slopes))
        self.ng = len(slopes)
        self.slope = slopes + slopes  # groups [0, ng): under the preemption cap; [ng, 2ng): at it
        self.bound = bounds + bounds
        self.smax = max(map(abs, slopes))
        # exact groups first: their tops give a best key that lets most bound groups be skipped
        order = sorted(range(2 * self.ng), key=lambda g: self.bound[g])
        self.order = {False: order, True: [g for g in order if g < self.ng]}
        self.heaps: list[list[tuple[float, int, int, int]]] = [[] for _ in self.slope]
        self.live = [0] * len(self.slope)
        self.trans: list[tuple[int, int, int]] = []  # (global step of the next group change, i, stamp)
        n = len(arrival)
        self.stamp, self.grp = [0] * n, [0] * n
        self.segment, self.key = policy.segment, policy.running_key
        self.aged_arr = [aging * a for a in arrival]
        self.G_done = -1

    def add(self, i: int, G: int) -> None:
        self.pos[i] = len(self.slots)
        self.slots.append(i)
        self._place(i, G, self.steps0[i], self.tok0[i])

    def remove(self, i: int) -> None:
        self._slot_remove(i)
        self.live[self.grp[i]] -= 1
        self.stamp[i] += 1

    def _place(self, i: int, G: int, steps: int, tokens: float) -> None:
        g, key, n_valid = self.segment(i, steps, tokens)
        if self.npre[i] >= self.limit:
            g += self.ng
        stamp = self.stamp
        st = stamp[i] = stamp[i] + 1
        self.grp[i] = g
        live = self.live[g] = self.live[g] + 1
        h = self.heaps[g]
        # an entry (−c, i, stamp, step stored): c + slope·G is the key at step G (a bound group: at most the
        # key); aging lowers keys by aging·(t − arrival): its arrival part is per request, its t part common
        # to all, so it is left out of the comparison (aged_arr[i] = aging·arrival)
        heapq.heappush(h, (self.slope[g] * G - key - self.aged_arr[i], i, st, G))
        if n_valid:
            heapq.heappush(self.trans, (G + n_valid, i, st))
        if len(h) > 64 and len(h) > 4 * live:  # drop stale entries now and then
            h[:] = [e for e in h if e[2] == stamp[e[1]]]
            heapq.heapify(h)

    def _advance(self, G: int) -> None:
        trans, stamp, grp, live = self.trans, self.stamp, self.grp, self.live
        G0, steps0, tok0, rate = self.G0, self.steps0, self.tok0, self.rate
        while trans and trans[0][0] <= G:
            _, i, st = heapq.heappop(trans)
            if st == stamp[i]:
                live[grp[i]] -= 1
                d = G - G0[i]
                self._place(i, G, steps0[i] + d, tok0[i] + rate[i] * d)
        self.G_done = G

    def _refresh(self, h: list, G: int, s: float) -> None:
        """Replace a bound group's top entry by its exact key at step G."""
        _, i, st, _ = heapq.heappop(h)
        d = G - self.G0[i]
        key = self.key(i, self.steps0[i] + d, self.tok0[i] + self.rate[i] * d)
        heapq.heappush(h, (s * G - key - self.aged_arr[i], i, st, G))

    def worst(self, G: int, t: float, capped: bool = False, above: float = -math.inf) -> tuple[float, int]:
        """(key, request) of the running request with the largest aged key; (-inf, -1) if there is none, or
        if no key can exceed `above` (a shortcut: the caller preempts only a request whose key does)."""
        if G != self.G_done:
            self._advance(G)
        heaps, live, slope, stamp, bound = self.heaps, self.live, self.slope, self.stamp, self.bound
        at = self.aging * t  # keys here are not yet lowered by aging·t
        best, tops = -math.inf, []
        for g in self.order[capped]:
            if not live[g]:
                continue
            h, s = heaps[g], slope[g]
            while h[0][2] != stamp[h[0][1]]:
                heapq.heappop(h)
            v = s * G - h[0][0]
            if bound[g]:  # v bounds the group's keys: refresh the top until it is exact, unless v is too low
                ref = best if best > -math.inf else v
                tol = _REL * (abs(ref) + self.smax * G + at + 1.0)
                if v < best - 2 * tol or v + tol < above + at:
                    continue
                while h[0][3] != G:
                    self._refresh(h, G, s)
                    while h[0][2] != stamp[h[0][1]]:
                        heapq.heappop(h)
                v = s * G - h[0][0]
            tops.append((g, v))
            if v > best:
                best = v
        if not tops:
            return -math.inf, -1
        tol = _REL * (abs(best) + self.smax * G + at + 1.0)
        if best + tol < above + at:
            return -math.inf, -1
        lo = best - 2 * tol
        cand: list[int] = []
        for g, v in tops:
            if v < lo:
                continue
            h, s = heaps[g], slope[g]
            floor = s * G - lo
            n = len(h)
            # the top alone, when neither child (nor so anything below) is within reach: no pops
            if (n < 2 or h[1][0] > floor) and (n < 3 or h[2][0] > floor):
                cand.append(h[0][1])
                continue
            top = []
            while h and h[0][0] <= floor:
                e = h[0]
                if e[2] != stamp[e[1]]:
                    heapq.heappop(h)
                elif e[3] != G and bound[g]:
                    self._refresh(h, G, s)
                else:
                    top.append(heapq.heappop(h))
                    cand.append(e[1])
            for e in top:
                heapq.heappush(h, e)
        if len(cand) == 1:
            i = cand[0]
            return self._exact(i, G, t), i
        pos = self.pos
        return max((self._exact(i, G, t), -pos[i], i) for i in cand)[::2]

    def _exact(self, i: int, G: int, t: float) -> float:
        d = G - self.G0[i]
        k = self.key(i, self.steps0[i] + d, self.tok0[i] + self.rate[i] * d)
        return k - self.aging * (t - self.arr[i]) if self.aging else k


class SlotRunSet(_Base):
    def __init__(self, policy: Policy, state: tuple[list, list, list, list, list], arrival: list[float],
                 aging: float, limit: float, max_batch: int) -> None:
        super().__init__(policy, state, arrival, aging, limit, max_batch)
        self.arrn = np.asarray(arrival)
        self.idx, self.g0, self.s0, self.np = (np.zeros(max_batch, np.int64) for _ in range(4))
        self.t0, self.r = np.zeros(max_batch), np.zeros(max_batch)
        self.rkeys = policy.running_keys

    def add(self, i: int, G: int) -> None:
        k = len(self.slots)
        self._slot_add(i)
        self.idx[k], self.g0[k], self.s0[k], self.t0[k], self.r[k], self.np[k] = (
            i, self.G0[i], self.steps0[i], self.tok0[i], self.rate[i], self.npre[i])

    def remove(self, i: int) -> None:
        last = len(self.slots) - 1
        k = self._slot_remove(i)
        if k != last:
            for a in (self.idx, self.g0, self.s0, self.t0, self.r, self.np):
                a[k] = a[last]

    def worst(self, G: int, t: float, capped: bool = False, above: float = -math.inf) -> tuple[float, int]:
        B = len(self.slots)
        if B == 0:
            return -math.inf, -1
        idx = self.idx[:B]
        d = G - self.g0[:B]
        keys = self.rkeys(idx, self.s0[:B] + d, self.t0[:B] + self.r[:B] * d)
        if self.aging:
            keys = keys - self.aging * (t - self.arrn[idx])
        if capped:
            keys = np.where(self.np[:B] < self.limit, keys, -np.inf)
        j = int(np.argmax(keys))
        return float(keys[j]), int(idx[j])


def make_runset(policy: Policy, state: tuple[list, list, list, list, list], arrival: list[float],
                aging: float, limit: float, max_batch: int) -> HeapRunSet | SlotRunSet:
    """The heap form where the bound policy has one (`policy.slopes` set by `bind`), else the numpy form."""
    cls = HeapRunSet if policy.slopes is not None else SlotRunSet
    return cls(policy, state, arrival, aging, limit, max_batch)
