"""Who may do what: roles and the actions they allow, runtime API tokens, teams (pure, no I/O)."""
