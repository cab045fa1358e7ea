"""The recipes the dashboard's tests run in a server's state home: one that pauses on a person's
approval between two steps, one whose step fails each of its three attempts."""

GATE = """\
recipe: gate
version: 1
description: A person's approval between two steps.
inputs: {type: object}
steps:
  - id: before
    do: flow.pass
  - id: approve
    do: human.approve
    with: {prompt: "Ship release 1.2?", timeout: 600}
  - id: after
    do: flow.pass
"""
FLAKY = """\
recipe: flaky
version: 1
description: A step that fails each attempt.
inputs: {type: object}
steps:
  - {id: before, do: flow.pass}
  - id: flaky
    do: flow.fail
    with: {code: flaky, message: always fails}
    retry: {max_attempts: 3, interval: 0.05, backoff_rate: 1}
"""
