"""cpattn in other libraries' model code: integrations.transformers registers cpattn with
Hugging Face transformers' attention interface."""
