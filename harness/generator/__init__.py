"""The generator (pure): what a run does and when: a scenario turned into a timed plan of
operations (inject, heal, create a topic, start a reader) that the runner interprets."""
