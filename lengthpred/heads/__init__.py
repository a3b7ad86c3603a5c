"""Length-predictor heads behind one sklearn-style protocol, and the train/select/test loop.

Every head is an sklearn estimator: `fit(X, y) -> self` (fresh state), `predict(X)` → lengths in
tokens, learned attributes ending in `_`, `n_parameters`, `save(dir)` / `HEADS`-aware `load_head(dir)`
(safetensors + json, never pickle); the torch MLP heads also have `partial_fit`. Heads that predict a distribution (`predicts_distribution`:
egtp, estp, estp_learned, probe, quantile_linear, censored_lognormal) also have `predict_dist(X)` (a
`lengthpred.distributions` object) and `predict_quantiles(X, q)`; every other head refuses both in one line.
Every head gives `predict_points(X)` (`Points`: the configured `predict`, a median and a mean from one pass;
None for a point it has no honest estimate of, e.g. proxy_rank's mean) and `predict_median` / `predict_mean`.

Input convention. Each head class names the one field of a `HeadInput` it reads (`input_kind`), and
its X is that field as plain data:

| heads | input_kind | X |
|---|---|---|
| linear, egtp, estp, probe | `features` | [n, d] float array: one feature column, e.g. `hs.L20.last` |
| concat | `features` | [n, k·d] float array: k columns side by side (head config `layers`), e.g. `hs.L16.last ‖ hs.L20.last` |
| estp_learned | `tokens` | n arrays [t_i, d + 2]: one layer's token states ‖ entropy ‖ attention received |
| proxy_reg, proxy_cls, proxy_rank | `texts` | list of n prompt strings |
| lora | `messages` | list of n chats (lists of {role, content} messages), templated as the serving model reads them |
| prompt_len | `n_prompt_tokens` | [n, 1] float array |
| constant | `ids` | anything with n rows (only counted) |
| domain_median | `domains` | [n, 1] object array of domain labels |

`HeadInput.x_for(head.input_kind)` builds that X; `run_training` does it for every split. y is the
per-prompt target in tokens, where a capped generation counts as the cap (a lower bound).
"""

from lengthpred.heads import baselines, binned, concat, distributional, fusion, linear, lora, proxy  # noqa: F401  (registers the heads)
from lengthpred.heads.base import (
    HEADS,
    BaseHead,
    HeadInput,
    HeadInputError,
    LabeledSet,
    NoDistributionError,
    NoPointError,
    Points,
    load_head,
)
from lengthpred.heads.baselines import ConstantHead, DomainMedianHead
from lengthpred.heads.binned import EGTPHead, ESTPHead, ProbeHead
from lengthpred.heads.concat import ConcatLinearHead
from lengthpred.heads.distributional import CensoredLogNormalHead, QuantileLinearHead
from lengthpred.heads.fusion import ESTPLearnedHead
from lengthpred.heads.linear import LinearHead, PromptLenHead
from lengthpred.heads.lora import LoraHead
from lengthpred.heads.proxy import ProxyClsHead, ProxyRankHead, ProxyRegHead
from lengthpred.heads.settings import HeadSettings
from lengthpred.heads.training import build_head, predictions_frame, run_training, score

__all__ = [
    "HEADS",
    "BaseHead",
    "CensoredLogNormalHead",
    "ConcatLinearHead",
    "ConstantHead",
    "DomainMedianHead",
    "EGTPHead",
    "ESTPHead",
    "ESTPLearnedHead",
    "HeadInput",
    "HeadSettings",
    "HeadInputError",
    "LabeledSet",
    "LinearHead",
    "LoraHead",
    "NoDistributionError",
    "NoPointError",
    "Points",
    "ProbeHead",
    "PromptLenHead",
    "QuantileLinearHead",
    "ProxyClsHead",
    "ProxyRankHead",
    "ProxyRegHead",
    "build_head",
    "load_head",
    "predictions_frame",
    "run_training",
    "score",
]
