"""The model of the world: specs, hardware, routing, kernel plans, costs and the event timer. No torch here."""
