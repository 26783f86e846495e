"""Pure parts of the group coordinator: the group state machine (:mod:`.group`), the
``__consumer_offsets`` record formats (:mod:`.records`), error codes (:mod:`.codes`)."""
