"""Kernel plans: what one decode or verification step launches (per kernel style), parallel layouts and the
slowest rank's plan with its collectives, and the memory fit. Plans describe work; they never time it.

May import models/ and routing/; never execution/ or hardware/ (device facts arrive through the
`PlanDevice` and `DeviceMemory` protocols, which a hardware profile satisfies).
"""
