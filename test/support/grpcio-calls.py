"""Calls made by Python grpcio (C-core), a gRPC client this project did not
write. Reads {"target", "calls": [...]} as JSON on stdin; each call names its
`path`, its request bytes (`request_hex`, sent as they are: no schema needed),
its `metadata` ([[key, value], ...]), whether the answer is a `stream`, and
optionally `compression` ("deflate", "gzip"). Prints one JSON array: per call
the status code (number and name), its details (the message), the trailing
metadata and the number of messages received."""
import json
import sys

import grpc


def identity(b):
    return b


def run(channel, call):
    path = call["path"]
    request = bytes.fromhex(call["request_hex"])
    metadata = [tuple(kv) for kv in call.get("metadata", [])]
    compression = {"deflate": grpc.Compression.Deflate, "gzip": grpc.Compression.Gzip}.get(call.get("compression"))
    timeout = call.get("timeout", 30)
    received = 0
    try:
        if call.get("stream"):
            it = channel.unary_stream(path, request_serializer=identity, response_deserializer=identity)(
                request, metadata=metadata, timeout=timeout, compression=compression
            )
            for _ in it:
                received += 1
            code, details, trailing = it.code(), it.details(), it.trailing_metadata()
        else:
            _, it = channel.unary_unary(path, request_serializer=identity, response_deserializer=identity).with_call(
                request, metadata=metadata, timeout=timeout, compression=compression
            )
            received = 1
            code, details, trailing = it.code(), it.details(), it.trailing_metadata()
    except grpc.RpcError as e:
        code, details, trailing = e.code(), e.details(), e.trailing_metadata()
    return {
        "code": code.value[0],
        "name": code.name,
        "details": details,
        "trailing": {k: v if isinstance(v, str) else v.hex() for k, v in (trailing or [])},
        "received": received,
    }


def main():
    spec = json.load(sys.stdin)
    channel = grpc.insecure_channel(spec["target"])
    print(json.dumps([run(channel, call) for call in spec["calls"]]), flush=True)
    channel.close()


main()
