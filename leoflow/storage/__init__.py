"""Object storage: the one door to buckets (S3, GCS, Azure Blob, a local directory).

Everything Leoflow keeps outside PostgreSQL — task logs in full today, artifacts later — goes
through :class:`~leoflow.storage.objects.ObjectStore`, the only module that imports the storage
library (``obstore``), which translates its errors into :class:`~leoflow.storage.objects.StorageError`
by meaning. :mod:`.log_chunks` says how a log becomes objects (names, compression), pure.
This package sits beside the data layer: it imports the model and the settings, nothing above.
"""
