"""Model families: tokenizer, renderer, tool-call and reasoning parsers, stop tokens.

The bottom of the house above the schemas: the reference backend, the interceptor, the
reconstructor, the checker and the report use it, and it imports none of them.
"""
