"""The OpenAPI document of the HTTP API (:mod:`.document` assembles it).

Each operation (method, path, auth, parameters, answers) is declared once, beside its handler in
:mod:`leoflow.api.routes` (:class:`leoflow.api.operations.Operations`); this package holds what
those declarations refer to. :mod:`.components` holds what every resource shares (schema
blocks, error answers, common parameters, :func:`~.components.op`); each resource module
(``dags``, ``runs``, ``pools`` …) holds its named schemas and path parameters and imports only
``components`` (``versions`` also :mod:`.dags`, for the flag beside a spec).
"""
