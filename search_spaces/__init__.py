"""The search space: knobs, their domains, conditions and the constraints checked before simulating.

One knob is one small class (``search_spaces/_knobs.py``) behind :class:`Knob`; one constraint is
one small class (``_constraints.py``) behind :class:`Constraint`; one repair of a drawn point, or
pruning of a domain before sampling, is one small class (``_repair.py``) behind :class:`Repair` or
:class:`Pruner`. A workload's ``space:`` pins (a value) or narrows (a list, or ``{low, high}``) any knob.

Example:
    >>> from servopt.search_spaces import SearchSpace, example_context
    >>> space = SearchSpace(example_context(), {"gpu": "h100", "mode": "aggregated"})
    >>> space.domain("tp").values()
    [1, 2, 4, 8]
"""

from ._constraints import CONSTRAINTS, Constraint, Violation
from ._context import ModelChoice, SpaceContext, SpeculationChoice, WeightsOption, example_context, weight_options
from ._domains import LISTED_VALUES, Choices, Domain, FloatRange, IntRange, Value
from ._knobs import AGGREGATED, DISAGGREGATED, KNOBS, SPECULATION_OFF, Knob
from ._repair import PRUNERS, REPAIRS, Pruner, Repair
from ._candidate import Candidate
from ._space import SearchSpace

__all__ = [
    "AGGREGATED", "CONSTRAINTS", "Candidate", "Choices", "Constraint", "DISAGGREGATED", "Domain", "FloatRange",
    "IntRange", "KNOBS", "LISTED_VALUES", "Knob", "ModelChoice", "SPECULATION_OFF", "SearchSpace", "SpaceContext", "WeightsOption", "weight_options",
    "SpeculationChoice", "Value", "Violation", "example_context", "PRUNERS", "REPAIRS", "Pruner", "Repair",
]
