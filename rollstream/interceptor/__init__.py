"""The interceptor: a mitmproxy addon between harness and inference server (issue 4).

It detects the API a harness speaks, translates it to Chat Completions upstream, asks the
server for token ids and logprobs, and records every call as a CallRecord on the events topic.
"""
