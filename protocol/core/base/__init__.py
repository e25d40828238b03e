"""The protocol abstraction every family implements and the server and the simulator drive: the
``Protocol`` and ``Predictor`` base classes (``protocol``) and the values their steps exchange
(``records``). Import from those two modules."""
