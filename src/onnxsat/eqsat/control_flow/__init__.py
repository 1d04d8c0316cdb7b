"""Control flow inside the optimizer: If, Loop and Scan bodies rewritten like the main graph (``bodies``), the
branches and trip counts constants decide settled (``branches``), names kept valid across scopes (``scopes``)."""
