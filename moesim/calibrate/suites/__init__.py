"""The calibration suites: torch microbenchmarks on the local device (torch imported lazily), their sizes by
device (`plan`) and the resumable runner that measures, fits and writes the profile (`runner`).
"""
