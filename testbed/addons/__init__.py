"""Scheduler add-ons from their own projects, built from their Go modules and run against a test bed."""
