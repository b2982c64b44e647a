"""Rows about a try's pod beyond its status: the Kubernetes events kept with the try (:mod:`.events`)."""
