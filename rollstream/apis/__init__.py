"""Pure translators between the harnesses' APIs and Chat Completions.

No I/O here: requests, answers, stream chunks and errors go in as dicts and come out as dicts or
server-sent events, so unit and property tests drive them directly.
"""
