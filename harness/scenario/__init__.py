"""Scenario values (pure): the Scenario, its sections, fault values and fault tables, field
validation, scenario text and ``--set`` overrides. Reading files is above, in ``harness.catalog.resolve``."""
