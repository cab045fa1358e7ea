"""Observability seams: traces (:mod:`runner.observe.tracing`), in-process counts for ``/metrics``
(:mod:`runner.observe.meter`) and the Prometheus exposition (:mod:`runner.observe.metrics`, serve only).

The first two import nothing but the standard library, so any module may call them; each is off (a
no-op) until configured, which is what keeps a cold command cold."""
