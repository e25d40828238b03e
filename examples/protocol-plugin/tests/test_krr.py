"""example-krr passes fedldp's conformance kit (run with the plugin installed: the kit's HTTP
checks start a server, which serves the protocol from the catalogue by its name)."""

from fedldp_example_krr import KaryRR

from fedldp.client.population.api import PopulationSpec
from fedldp.testing import check_protocol

POPULATION = PopulationSpec(
    users=600, samples=4, distribution="categorical", items=6, epsilon_mix="1:0.5,2:0.5"
)


def test_example_krr_passes_the_kit() -> None:
    check_protocol(KaryRR(), population=POPULATION, seed=0, strict=True)
