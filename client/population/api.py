"""The population API: what a law plugin, a plugin's tests or a script needs to describe simulated
users, and nothing internal (the population's counterpart of ``fedldp.protocol.api``). These names
are stable (tests/client/population/test_api.py freezes them); everything else in
``fedldp.client.population`` may change.

**A law plugin** is an installed distribution declaring a ``Distribution`` subclass as an entry
point of group ``fedldp.laws`` (``LAW_ENTRY_POINT_GROUP``)::

    [project.entry-points."fedldp.laws"]
    triangle = "my_package.laws:Triangle"

``--distribution triangle`` (or ``distribution: triangle`` in a population or experiment file)
then draws every user's samples from ``Triangle(**law_params)``, its options given as
``--law-param KEY=VALUE`` (``law_params:`` in a file). The name must not be a built-in law's
(``BUILT_IN_LAWS``: such a plugin is refused, the built-in served); ``fedldp laws`` lists the
laws with their origins and the plugin laws that are not served, with the reason.

**The contract of a ``Distribution``** (its docstrings state each part):

* ``dimension``: None for scalar samples, d for vectors in R^d; ``categorical`` True for items
  0..k−1 (the mean is then the probability vector of length k); the data kind a protocol sees
  follows: scalar, vector or categorical;
* ``sample(streams, m)``: ``m`` samples of every user of the block, shape
  ``(streams.n, m, *item_shape)``, every random number from ``streams`` (a ``UserStreams``:
  user u's from its own row, the first axis of every draw being the user axis), and exactly
  ``draws_per_sample`` uniforms per sample whatever the data, so that a user's samples depend
  only on its stream and its sample count, never on the block it is drawn with;
* ``mean()`` and ``variance()``: the law's exact mean (the truth the protocols' estimates are
  compared with) and the variance of one coordinate of one sample;
* ``support()`` (optional): the interval [lo, hi] every coordinate of every sample lies in
  (default: unbounded), which a protocol's declared data range (``Protocol.data_range``) is
  checked against;
* the constructor validates the options (``ValueError``, with a message a user can act on);
  the law is immutable (a frozen dataclass, as the built-in laws are).

**Populations**: ``PopulationSpec`` holds every option of ``fedldp simulate``'s population group
(``check_protocol``'s ``population=`` takes one); ``build_population(spec, seed)`` makes the
population of a run seed.
"""

from __future__ import annotations

from fedldp.client.population.build import build_population
from fedldp.client.population.distributions import Distribution
from fedldp.client.population.laws import BUILT_IN_LAWS, LAW_ENTRY_POINT_GROUP
from fedldp.client.population.spec import PopulationSpec
from fedldp.protocol.core.base.records import FloatArray, IntArray
from fedldp.protocol.core.streams import StreamKey, UserStreams

__all__ = [
    "BUILT_IN_LAWS",
    "LAW_ENTRY_POINT_GROUP",
    "Distribution",
    "FloatArray",
    "IntArray",
    "PopulationSpec",
    "StreamKey",
    "UserStreams",
    "build_population",
]
