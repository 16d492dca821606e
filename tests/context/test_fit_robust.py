"""A fingerprint's probes weighed by how far they lie off the fit, from the first solve."""

from __future__ import annotations

from fleetgate.context.families import FAMILIES
from fleetgate.context.fit import TokenizerFit, dot
from fleetgate.context.probes import MIXES, TEXTS, text_tally


def test_probes_far_off_the_fit_do_not_pull_the_fingerprint() -> None:
    prior = FAMILIES["generic"].weights
    truth = tuple(0.8 * w for w in prior)  # an engine the tally's fields describe exactly
    probes = []
    odd = set(range(0, len(TEXTS) + len(MIXES), 8))
    for i, text in enumerate((*TEXTS, *MIXES)):
        counts = text_tally(text).counts
        # one probe in eight the engine counts at 1.6 times what the fields say (a text
        # whose tokens the fields do not describe): such probes weighed as much as the rest
        # when there was no fit yet, and pulled every estimate towards them
        probes.append((counts, round(dot(truth, counts) * (1.6 if i in odd else 1.0))))
    fit = TokenizerFit(prior)
    fit.set_fingerprint("engine", probes)
    ratios = [t / fit.tokens(c) for i, (c, t) in enumerate(probes) if i not in odd and t >= 40]
    # before, 0.74 of them
    assert sum(0.95 <= r <= 1.05 for r in ratios) >= 0.95 * len(ratios)
