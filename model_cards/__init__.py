"""Model card templates, shipped inside the package as `hf_elmo.model_cards`."""
