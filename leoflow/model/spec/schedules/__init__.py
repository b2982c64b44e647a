"""The schedules people write, beyond one cron: lists of crons, ``@once``, ``every:``, overlap rules.

:mod:`.forms` parses and validates them (every problem names its field) and encodes the time part
into the one string ``dags.schedule`` keeps; :mod:`leoflow.model.spec.timetable` plans from that
string.
"""
