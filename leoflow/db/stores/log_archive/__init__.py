"""The log archive's rows: its index (:mod:`.index`) and the objects retention still has to delete (:mod:`.garbage`).

The objects themselves are in object storage (:mod:`leoflow.storage`).
"""
