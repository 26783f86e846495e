"""One run and its surroundings (I/O): the runner, the services (containers), node configs,
host load sampling, chaos sessions and campaigns of many runs."""
