"""Generated protobuf and gRPC stubs for rewardseal.v1 (do not edit; `make proto`)."""
