"""Every feature file under features/, run against the target chosen with --sb-target."""

from pytest_bdd import scenarios

scenarios(".")
