"""``sandbridge doctor``'s checks: what works on this machine and what does not, each
with its fix (docs/doctor.md).

Each check is a small function in a declared list (:data:`.checks.CHECKS`) that returns
one :class:`~.finding.Finding`; a later check (an agent profile's command, its state)
is one more function in the list. The package sits beside ``daemon/``, above every part
it asks about; the command line (``cli/doctor.py``) prints what it finds.
"""
