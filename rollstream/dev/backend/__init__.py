"""The reference inference server: vLLM's token-id protocol on the CPU.

Serves Chat Completions and Completions the way vLLM does where rollstream depends on it
(``return_token_ids``, logprobs, Hermes tool calls, streaming), with a real Hugging Face
tokenizer and chat template, and a policy that is either scripted (scenarios) or a tiny real
language model. It is the default upstream of the local stack and of the tests.
"""
