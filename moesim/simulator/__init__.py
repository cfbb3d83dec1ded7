"""The model of the world: specs, hardware, routing, kernel plans, costs and the event engine. No torch here."""
