"""The reference costs that ship with mtdecode (`mtdecode.store.REFERENCE`), measured on an idle host, which the
course's notebooks read so that their conclusions do not depend on the load of a shared class server."""

import os

from mtdecode import store
from mtdecode.beams import BEAM_WIDTH
from mtdecode.costs import curves, priors, probes, timing
from mtdecode.zoo.eagle import TREE_WIDTH


def record_reference() -> None:
    """Measure the reference costs (`mtdecode.store.REFERENCE`) that the course's notebooks read: the default model's
    forward costs, its draft's, a draft forward beside a target forward (`draft_forward_cost`), one more depth of its
    EAGLE head's tree at the default width, one more depth of MTAD's beams at its default width, the draft's
    acceptance (`draft_acceptance`) and Jacobi's (`jacobi_acceptance`). Run it on an idle host; it replaces what
    was there."""
    from mtdecode.zoo import DEFAULT_MODEL, DRAFT_MODEL, EAGLE_MODEL, load_model

    for path in store.REFERENCE.glob("*.json"):
        path.unlink()
    os.environ["MTDECODE_COSTS"] = "record-reference"
    timing._COSTS.clear()
    target, draft = load_model(DEFAULT_MODEL), load_model(DRAFT_MODEL)
    timing.forward_costs(target), timing.forward_costs(draft), curves.draft_forward_cost(target, draft, 1)
    probes.measure_depth_cost(target, load_model(EAGLE_MODEL), TREE_WIDTH)
    probes.measure_beam_depth_cost(target, draft, BEAM_WIDTH)
    priors.draft_acceptance(target, draft)
    priors.jacobi_acceptance(target)
    for path in sorted(store.REFERENCE.glob("*.json")):
        print(path.name)
