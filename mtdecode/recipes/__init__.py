"""Training recipes for the models that ship in `mtdecode.zoo`: the distilled draft (`mtdecode.recipes.distill`)
and the EAGLE head (`mtdecode.recipes.eagle`), with the prompts they train on (`mtdecode.recipes.prompts`). Each is
resumable, `python -m mtdecode.recipes.NAME all --work DIR`. Nothing in the library imports them: they use the
library (its strategies decode their data), not the other way round.
"""
