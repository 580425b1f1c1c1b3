"""The one place where rewardseal errors meet the gRPC wire (docs/spec.md §8).

Servers turn a ``RewardSealError`` into ``google.rpc.Status`` with one ``ErrorInfo`` (domain
``rewardseal``); clients turn such a status back into the same error class, so code on both
sides handles ``DuplicateEpisode`` or ``Unscored`` rather than status numbers.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeAlias, TypeVar, cast

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from rewardseal.core import errors
from rewardseal.v1.episode_pb2 import EpisodeError

_log = logging.getLogger(__name__)

_CLASS_BY_REASON: Mapping[str, type[errors.RewardSealError]] = {
    cls.reason: cls
    for cls in (
        errors.ValidationError,
        errors.InvalidEpisode,
        errors.InvalidTaskParameters,
        errors.ContractMismatch,
        errors.IdentityMissing,
        errors.IdentityMismatch,
        errors.IdentityConflict,
        errors.PolicyUpdateRegressed,
        errors.PolicyUpdateJump,
        errors.CertificationRefused,
        errors.StaleRevocationList,
        errors.SignatureError,
        errors.DuplicateEpisode,
        errors.IdentityBusy,
        errors.Unscored,
        errors.NotFound,
        errors.Unauthenticated,
        errors.PermissionDenied,
        errors.Unavailable,
        errors.IntegritySpecInvalid,
        errors.RewardMappingError,
        errors.ShardCorrupt,
        errors.ShardSealed,
        errors.ReviewRefused,
        errors.DecisionSuperseded,
        errors.BindingRefused,
        errors.AuditStateConflict,
        errors.ShardAlreadyAudited,
        errors.BindingMismatch,
        errors.InvalidSubject,
        errors.NothingToAttest,
    )
}
_CLASS_BY_CODE: Mapping[errors.Code, type[errors.RewardSealError]] = {
    # For failures that carry no ErrorInfo (a transport error, a peer that is not ours).
    errors.Code.INVALID_ARGUMENT: errors.ValidationError,
    errors.Code.ALREADY_EXISTS: errors.DuplicateEpisode,
    errors.Code.NOT_FOUND: errors.NotFound,
    errors.Code.UNAUTHENTICATED: errors.Unauthenticated,
    errors.Code.PERMISSION_DENIED: errors.PermissionDenied,
    errors.Code.UNAVAILABLE: errors.Unavailable,
}
_GRPC_BY_CODE: Mapping[errors.Code, grpc.StatusCode] = {
    errors.Code(code.value[0]): code for code in grpc.StatusCode
}
_CODE_BY_VALUE: Mapping[int, errors.Code] = {int(code): code for code in errors.Code}


def grpc_code(code: errors.Code) -> grpc.StatusCode:
    """The ``grpc.StatusCode`` of a rewardseal status code (same name, same number)."""
    return _GRPC_BY_CODE[code]


def core_code(code: grpc.StatusCode) -> errors.Code:
    """The rewardseal status code of a ``grpc.StatusCode`` (same name, same number)."""
    return errors.Code(code.value[0])


MAX_WIRE_MESSAGE = 1024
"""Most characters of an error message sent to a caller (the rest is cut, see below)."""
MAX_WIRE_METADATA_VALUE = 256
"""Most characters of one ErrorInfo metadata value sent to a caller."""


def wire_message(error: errors.RewardSealError) -> str:
    """``error``'s message, cut to :data:`MAX_WIRE_MESSAGE` characters.

    Messages quote input only through :func:`rewardseal.core.errors.preview`; this is the last
    guard. gRPC trailers have a size limit, and an error that outgrows it reaches the caller
    as RESOURCE_EXHAUSTED instead of its own code and reason.
    """
    return errors.preview(error.message, MAX_WIRE_MESSAGE, quoted=False)


def wire_metadata(error: errors.RewardSealError) -> dict[str, str]:
    """``error``'s ErrorInfo metadata with each value cut to :data:`MAX_WIRE_METADATA_VALUE`."""
    return {
        key: errors.preview(value, MAX_WIRE_METADATA_VALUE, quoted=False)
        for key, value in error.metadata.items()
    }


def error_info(error: errors.RewardSealError) -> error_details_pb2.ErrorInfo:
    """The ``ErrorInfo`` detail for ``error``."""
    return error_details_pb2.ErrorInfo(
        reason=error.reason, domain=errors.ERROR_DOMAIN, metadata=wire_metadata(error)
    )


def to_status(error: errors.RewardSealError) -> grpc.Status:
    """``error`` as a gRPC status carrying ``google.rpc.Status`` + ``ErrorInfo``."""
    detail = any_pb2.Any()
    detail.Pack(error_info(error))
    status = status_pb2.Status(code=int(error.code), message=wire_message(error), details=[detail])
    return cast(grpc.Status, rpc_status.to_status(status))


def to_episode_error(error: errors.RewardSealError) -> EpisodeError:
    """``error`` as the per-episode error of a batch or stream result."""
    return EpisodeError(
        code=int(error.code),
        reason=error.reason,
        message=wire_message(error),
        metadata=wire_metadata(error),
    )


def from_parts(
    code: errors.Code, reason: str, message: str, metadata: Mapping[str, str]
) -> errors.RewardSealError:
    """Rebuild the rewardseal error named by ``reason`` (falls back on the code's generic class)."""
    cls = _CLASS_BY_REASON.get(reason)
    if cls is None or cls.code != code:
        cls = _CLASS_BY_CODE.get(code, errors.RewardSealError)
    error = cls(message, reason=reason or None, metadata=metadata)
    if not reason and cls is errors.RewardSealError:
        error.reason = code.name.lower()
    error.code = code
    return error


def from_episode_error(error: EpisodeError) -> errors.RewardSealError:
    """The rewardseal error a batch or stream result carries."""
    code = _CODE_BY_VALUE.get(error.code, errors.Code.UNKNOWN)
    return from_parts(code, error.reason, error.message, dict(error.metadata))


def from_rpc_error(error: grpc.RpcError) -> errors.RewardSealError:
    """The rewardseal error behind a failed sync or asyncio call, read from its ``ErrorInfo``."""
    # Both grpc.Call errors and grpc.aio.AioRpcError expose these three methods.
    code = core_code(getattr(error, "code", lambda: grpc.StatusCode.UNKNOWN)())
    message: str = getattr(error, "details", lambda: str(error))() or ""
    trailing = getattr(error, "trailing_metadata", lambda: None)() or ()
    for key, value in trailing:
        if key != rpc_status.GRPC_DETAILS_METADATA_KEY or not isinstance(value, bytes):
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return from_parts(code, info.reason, status.message, dict(info.metadata))
    return from_parts(code, "", message, {})


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: errors.RewardSealError) -> None:
    """End the call with ``error``'s status and ErrorInfo (raises, as aio abort does)."""
    await context.abort_with_status(to_status(error))


_Handler = TypeVar("_Handler", bound=Callable[..., Awaitable[Any]])


def maps_errors(handler: _Handler) -> _Handler:
    """Decorate an async unary-response servicer method: rewardseal errors become statuses.

    Anything else is logged with its traceback and answered INTERNAL without details, so a
    bug never leaks record contents or stack frames to a caller.
    """

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await handler(self, request, context)
        except errors.RewardSealError as error:
            await abort(context, error)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception:
            _log.exception("unhandled error in %s", handler.__qualname__)
            await abort(context, errors.RewardSealError("internal error"))
        return None  # unreachable: abort raises

    return cast(_Handler, wrapper)


# -------------------------------------------------------------------------------------------
# Requests that are not the message they claim to be
# -------------------------------------------------------------------------------------------


# A string alias: grpc's handler class is generic only in its type stubs, not at run time.
_MethodHandler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class _Undecodable:
    """What a guarded deserializer hands on instead of raising (see :func:`guard_decoding`);
    ``too_deep``: the parser gave up on the message's nesting, not on its bytes."""

    __slots__ = ("too_deep",)

    def __init__(self, *, too_deep: bool) -> None:
        self.too_deep = too_deep


_UNDECODABLE = _Undecodable(too_deep=False)
_TOO_DEEP = _Undecodable(too_deep=True)
_DEPTH_WORDS = ("maxdepth", "too deep", "nesting", "recursion")
"""How protobuf's parsers say a message nests past their limit (upb: "Exceeded
upb_DecodeOptions_MaxDepth"; the pure-Python parser words it otherwise)."""

TooDeep: TypeAlias = Callable[[], errors.RewardSealError]
"""The error for a request nested past protobuf's parse limit (see :func:`guard_decoding`)."""


class _UndecodableRequest(Exception):
    """A streamed request was undecodable: raised to the servicer's read, turned into the
    abort by the guard's wrapper."""

    def __init__(self, marker: _Undecodable) -> None:
        super().__init__()
        self.marker = marker


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except RecursionError:
            return _TOO_DEEP
        except Exception as exc:  # DecodeError, or anything else a generated FromString raises
            text = str(exc).lower()
            return _TOO_DEEP if any(word in text for word in _DEPTH_WORDS) else _UNDECODABLE

    return deserialize


def _undecodable_error() -> errors.ValidationError:
    # The bytes are never echoed: they are the caller's, and may be anything.
    return errors.ValidationError("the request is not a valid message of the method's type")


def guard_decoding(
    handler: _MethodHandler | None, *, too_deep: TooDeep | None = None
) -> _MethodHandler | None:
    """``handler`` with undecodable requests answered INVALID_ARGUMENT (docs/spec.md §8).

    ``too_deep`` makes the error for a request nested past protobuf's parse limit (the worker:
    ``invalid_episode``, since only episode metadata and grader items nest); None answers it
    like any other undecodable request.

    grpc answers a request its deserializer cannot parse with UNKNOWN and the parser's
    exception text; here the deserializer hands on a marker instead, and the call is aborted
    with ``invalid_argument`` (and ErrorInfo) before the servicer sees it. Streamed requests
    are checked one by one as the servicer reads them. Behaviours keep their form (coroutine
    function or async generator function) because grpc.aio dispatches on it. ``None``,
    handlers without a deserializer and synchronous behaviours pass through unchanged.
    """
    if handler is None or handler.request_deserializer is None:
        return handler
    streaming_in = handler.request_streaming
    streaming_out = handler.response_streaming
    behavior = cast(
        Callable[..., Any],
        {
            (False, False): handler.unary_unary,
            (False, True): handler.unary_stream,
            (True, False): handler.stream_unary,
            (True, True): handler.stream_stream,
        }[(streaming_in, streaming_out)],
    )

    def refusal(marker: _Undecodable) -> errors.RewardSealError:
        return too_deep() if marker.too_deep and too_deep is not None else _undecodable_error()

    async def checked(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        async for request in requests:
            if isinstance(request, _Undecodable):
                # Raised where the servicer reads; the wrapper below aborts, in the handler's
                # own task (a servicer may read its requests in another task: an abort from
                # there could race the handler's pending send).
                raise _UndecodableRequest(request)
            yield request

    def prepare(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        return checked(request, context) if streaming_in else request

    wrapped: Callable[..., Any]
    if inspect.iscoroutinefunction(behavior):

        async def wrapped(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, _Undecodable):
                return await abort(context, refusal(request))
            try:
                return await behavior(prepare(request, context), context)
            except _UndecodableRequest as undecodable:
                return await abort(context, refusal(undecodable.marker))

    elif inspect.isasyncgenfunction(behavior):

        async def wrapped(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, _Undecodable):
                await abort(context, refusal(request))
            try:
                async for answer in behavior(prepare(request, context), context):
                    yield answer
            except _UndecodableRequest as undecodable:
                await abort(context, refusal(undecodable.marker))

    else:  # a synchronous behaviour (grpc runs it in a thread with a blocking iterator)
        return handler

    factory: Callable[..., _MethodHandler] = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(streaming_in, streaming_out)]
    return factory(
        wrapped,
        request_deserializer=_tolerant(handler.request_deserializer),
        response_serializer=handler.response_serializer,
    )
