"""Recordings of real local runs (``python -m infra.alarms.record``) and the handler they run (:mod:`.handlers`)."""
