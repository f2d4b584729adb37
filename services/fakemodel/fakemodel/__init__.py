"""A scripted model server speaking the OpenAI and Anthropic wire formats.

Used by the tests and as the keyless demo model.
"""
