"""The kind suite's fixture, `kind_bed`, is the session's kind bed of suites/kind_bed.py (a root plugin, shared
with the kind fault matrix's smoke rows); `-m "not kind"` leaves the suite out."""
