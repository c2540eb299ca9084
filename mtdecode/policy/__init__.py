"""How much to guess: the drafting policy a strategy is handed."""
