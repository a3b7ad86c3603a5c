"""Static batches formed from a trace's requests: padding and useful throughput (`batches`) and their
tables (`report`).
"""
