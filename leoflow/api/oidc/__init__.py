"""OpenID Connect: the provider's tokens as the API's bearer credentials.

- :mod:`.keys` — the provider's discovery document and signing keys, cached, refetched on an
  unknown ``kid`` (rate-limited), kept while the provider is down;
- :mod:`.verifier` — a bearer JWT checked (size, algorithm allow-list, key, signature, issuer,
  audience, expiry, not-before, the groups claim's type) and turned into a
  :class:`~leoflow.api.auth.Principal` of kind ``oidc``; the :class:`~leoflow.api.auth.Authenticator`
  hands it every bearer value shaped like a JWT.

Configured by ``LEOFLOW_OIDC_*`` (:mod:`leoflow.settings.oidc`); nothing here runs when
``LEOFLOW_OIDC_ISSUER`` is unset. ``leoflow login`` (:mod:`leoflow.cli.access.login`) is the other end:
it obtains such a token from the provider for a person at a terminal.
"""
