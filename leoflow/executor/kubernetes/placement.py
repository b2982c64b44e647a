"""Where a try's pod runs: its team's namespace, service account and pod template.

A team of the teams file (``LEOFLOW_TEAMS_FILE``, :mod:`leoflow.model.access.teams`) may name a
``namespace``: its task pods are created, watched, adopted, killed and collected there and only
there, so its DAGs reference its Secrets by name and no other team's. A DAG's team is the one its
spec names (``team:``), else its DAG-id prefix's — the same rule the API's authorization uses. A
DAG of no team, a team without a namespace, and every install without a teams file use the
cluster's namespace (``LEOFLOW_K8S_NAMESPACE``), service account and template, as before.

The namespace is decided **once per try**, when its launch is recorded: the try's ``executor_ref``
then holds the pod's ref (:meth:`~.kube_client.KubernetesApi.ref`: ``namespace/name`` outside the
cluster's namespace), so a later leader, the log shipper and the garbage collector find the pod
where it was created even if the teams file changed since. Moving a DAG to another team while it
has live tries is refused by the API (409), so a try's pod and its DAG's team never disagree.

The executor watches every namespace a team names plus the cluster's (:meth:`Placements.namespaces`);
one the teams file adds while the leader runs is listed and watched before its first pod is created.
A namespace the teams file drops stays watched for the rest of the term (its pods may still run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from leoflow.db.connection.database import Connection
from leoflow.db.stores import dags as dag_store
from leoflow.model.access.teams import Teams
from leoflow.model.k8s.strategic_merge import merge_pods
from leoflow.settings import KubernetesSettings
from leoflow.settings.teams_file import TeamsSource


@dataclass(frozen=True)
class PodPlace:
    """A try's pod's namespace, service account and cluster-side template, resolved (no None namespace)."""

    namespace: str
    service_account: str | None
    template: Mapping[str, Any] = field(default_factory=dict, compare=False)
    team: str | None = None


class Placements:
    """The teams' placements over the cluster's settings (see the module docstring)."""

    def __init__(self, k8s: KubernetesSettings, namespace: str, teams: TeamsSource) -> None:
        self.k8s = k8s
        #: The cluster's namespace (``LEOFLOW_K8S_NAMESPACE``, else the client's).
        self.namespace = namespace
        self.teams = teams

    def current(self) -> Teams:
        return self.teams.current()

    def namespaces(self) -> frozenset[str]:
        """The cluster's namespace and every team's."""
        return frozenset({self.namespace}) | self.current().namespaces

    def for_team(self, team: str | None) -> PodPlace:
        place = self.current().placement(team)
        template: Mapping[str, Any] = self.k8s.pod_template
        if place.pod_template:
            template = merge_pods(template, place.pod_template)
        return PodPlace(namespace=place.namespace or self.namespace,
                        service_account=place.service_account or self.k8s.service_account,
                        template=template, team=place.team)

    async def for_dags(self, conn: Connection, dag_ids: Sequence[str]) -> dict[str, PodPlace]:
        """Each DAG's place (one query for the teams DAG specs name; none without a teams file)."""
        teams = self.current()
        wanted = list(dict.fromkeys(dag_ids))
        if not teams.configured:
            return {d: self.for_team(None) for d in wanted}
        named = await dag_store.named_teams(conn, wanted)
        return {d: self.for_team(named.get(d) or teams.team_of(d)) for d in wanted}
