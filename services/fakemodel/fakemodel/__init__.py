"""A scripted model server speaking the OpenAI and Anthropic wire formats, for tests and the keyless demo."""
