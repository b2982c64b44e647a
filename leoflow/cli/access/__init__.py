"""The commands about who may do what: ``leoflow login`` (a person's sign-in through the cluster's
OpenID Connect provider). One module per command, as in :mod:`leoflow.cli`; a sub-package so that
the CLI's folder stays small (STYLE.md 14)."""
