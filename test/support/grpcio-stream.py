"""A StreamMessages call made by Python grpcio, a gRPC client this project did
not write, with its default 4 MiB limit on a received message. Reads the
request (binary StreamMessagesRequest, hex) and the token from argv, stops
after `stop_after` messages, and prints one JSON line per response (its size,
its message count) and a last line with the call's status."""
import json
import sys

import grpc


def varint(b, i):
    shift = 0
    value = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def count_messages(b):
    """Field 1 (repeated Message) of a StreamMessagesResponse, counted without its schema."""
    i = 0
    n = 0
    while i < len(b):
        tag, i = varint(b, i)
        wire = tag & 7
        if wire == 2:
            length, i = varint(b, i)
            i += length
            if tag >> 3 == 1:
                n += 1
        elif wire == 0:
            _, i = varint(b, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return n


def main():
    target, token, request_hex, stop_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    channel = grpc.insecure_channel(target)
    call = channel.unary_stream(
        "/platform.queues.v1.QueueService/StreamMessages",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )(bytes.fromhex(request_hex), metadata=[("authorization", "Bearer " + token)], timeout=60)
    received = 0
    status = "OK"
    try:
        for response in call:
            n = count_messages(response)
            received += n
            print(json.dumps({"bytes": len(response), "messages": n}), flush=True)
            if received >= stop_after:
                call.cancel()
                break
    except grpc.RpcError as e:
        status = e.code().name
        if status != "CANCELLED":
            print(json.dumps({"status": status, "details": e.details()}), flush=True)
            return
    print(json.dumps({"status": status, "received": received}), flush=True)
    channel.close()


main()
