"""OpenID Connect settings: which provider's tokens the API accepts, and how a person maps to a scope.

Kept in its own module (beside the groups of :mod:`.groups`) because two readers need it: the
server (:func:`~.loader.load_settings`, the API's verifier) and ``leoflow login``, a client verb
that must not load the server's groups (:mod:`.client`). Both read the same declarations
(:mod:`.declared`) through the same :class:`~.environment.EnvironmentReader`.

Failure semantics: an issuer without an audience (nor a client id to default it to) is refused at
load with a :class:`~leoflow.errors.SettingsError` naming ``LEOFLOW_OIDC_AUDIENCE``: a verifier
that accepted any audience would accept every token the provider issues for *other*
applications. Nothing here touches the network; the provider is first asked when a token arrives.
"""

from __future__ import annotations

from typing import NamedTuple

from leoflow.errors import SettingsError
from leoflow.settings import declared as v
from leoflow.settings.environment import EnvironmentReader


class OidcSettings(NamedTuple):
    """Accepting an OpenID Connect provider's tokens (``issuer`` None: not at all).

    A NamedTuple, as :class:`~.client.ClientSettings`: ``leoflow login`` reads it and must not
    import :mod:`dataclasses`.
    """

    issuer: str | None = v.OIDC_ISSUER.default
    #: Accepted ``aud`` values (any one must be in the token's); the client id when not configured.
    audiences: tuple[str, ...] = v.OIDC_AUDIENCE.default
    #: Leoflow's client id at the provider (``leoflow login``; the dashboard).
    client_id: str | None = v.OIDC_CLIENT_ID.default
    algorithms: tuple[str, ...] = v.OIDC_ALGORITHMS.default
    #: A claim name, or a dotted path into nested claims (Keycloak's ``realm_access.roles``).
    groups_claim: str = v.OIDC_GROUPS_CLAIM.default
    #: The claim shown as the person's name in logs and audit (``sub`` when absent).
    name_claim: str = v.OIDC_NAME_CLAIM.default
    #: Groups whose members get the ``admin`` scope; every other verified person gets ``read``.
    admin_groups: tuple[str, ...] = v.OIDC_ADMIN_GROUPS.default
    #: Seconds after which the provider's keys are fetched again on the next token.
    keys_max_age: float = v.OIDC_KEYS_MAX_AGE.default
    #: Fewest seconds between two fetches of the keys (an unknown ``kid`` flood fetches once).
    keys_min_interval: float = v.OIDC_KEYS_MIN_INTERVAL.default
    #: Seconds of clock skew tolerated on ``exp``, ``nbf`` and ``iat``.
    leeway: float = v.OIDC_LEEWAY.default
    #: Scopes ``leoflow login`` asks for.
    scopes: tuple[str, ...] = v.OIDC_SCOPES.default
    #: Sent with the dashboard's code exchange when the provider made the client confidential (a secret).
    client_secret: str | None = v.OIDC_CLIENT_SECRET.default
    #: Signs the dashboard's sign-in cookies (a secret; the same on every replica). None: no dashboard sign-in.
    session_secret: str | None = v.OIDC_SESSION_SECRET.default

    def __repr__(self) -> str:  # the two secrets never reach a log line
        shown = self._replace(client_secret="***" if self.client_secret else None,
                              session_secret="***" if self.session_secret else None)
        return "OidcSettings(" + ", ".join(f"{k}={getattr(shown, k)!r}" for k in self._fields) + ")"

    @property
    def dashboard_sign_in(self) -> bool:
        return self.issuer is not None and self.client_id is not None and self.session_secret is not None

    @property
    def enabled(self) -> bool:
        return self.issuer is not None


def oidc_settings_from(reader: EnvironmentReader) -> OidcSettings:
    """The OIDC variables, with the audience defaulting to the client id; refuses an issuer with neither."""
    issuer = reader.get(v.OIDC_ISSUER)
    client_id = reader.get(v.OIDC_CLIENT_ID)
    audiences = reader.get(v.OIDC_AUDIENCE) or ((client_id,) if client_id else ())
    if issuer is not None and not audiences:
        raise SettingsError(v.OIDC_AUDIENCE.name, f"must be set when {v.OIDC_ISSUER.name} is (the token "
                            f"audiences to accept; {v.OIDC_CLIENT_ID.name} is used when it is not)")
    return OidcSettings(
        issuer=issuer, audiences=audiences, client_id=client_id,
        algorithms=reader.get(v.OIDC_ALGORITHMS), groups_claim=reader.get(v.OIDC_GROUPS_CLAIM),
        name_claim=reader.get(v.OIDC_NAME_CLAIM), admin_groups=reader.get(v.OIDC_ADMIN_GROUPS),
        keys_max_age=reader.get(v.OIDC_KEYS_MAX_AGE), keys_min_interval=reader.get(v.OIDC_KEYS_MIN_INTERVAL),
        leeway=reader.get(v.OIDC_LEEWAY), scopes=reader.get(v.OIDC_SCOPES),
        client_secret=reader.get(v.OIDC_CLIENT_SECRET), session_secret=reader.get(v.OIDC_SESSION_SECRET))
