"""One run and its surroundings (I/O): the runner (it interprets the generator's plan), the
resource and host-load samplers, chaos sessions, campaigns of many runs, and the loopback
processes of ``jbodlab demo``."""
