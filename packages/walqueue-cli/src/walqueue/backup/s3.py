"""`s3://bucket/prefix`: a replica in any S3-compatible store, through boto3 (the `s3` extra).

boto3 was chosen on measurement (docs/DECISIONS.md §34): it finds credentials
where every AWS tool does (the environment, ~/.aws, SSO, the instance's
role), its PutObject takes ``IfNoneMatch``/``IfMatch`` (conditional writes),
and it is imported only when a replica is ``s3://``. Configuration is the
AWS tools': ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID`` ...,
with `endpoint` and `region` (walqueue-serve's ``--replica-endpoint``,
``--replica-region``) taking precedence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, BinaryIO

from walqueue.backup.objectstore import CHUNK_BYTES, PreconditionFailed, StoreUnavailable, UsageError, check_key, chunks

__all__ = ["S3Store"]

_PRECONDITION_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})
_MISSING_CODES = frozenset({"NoSuchKey", "404", "NotFound"})


class S3Store:
    """A replica under `prefix` in `bucket`."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        endpoint: str | None = None,
        region: str | None = None,
        timeout: float = 30.0,
        attempts: int = 3,
        part_bytes: int = 8 * 2**20,
    ) -> None:
        try:
            import boto3  # type: ignore[import-untyped]
            from botocore.config import Config  # type: ignore[import-untyped]
        except ImportError:
            raise UsageError(
                "an s3:// replica needs the S3 extra: pip install 'walqueue-cli[s3]' (file:// needs nothing)"
            ) from None
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self.bucket = bucket
        #: A snapshot larger than this goes up as a multipart upload in parts of this size (S3's floor: 5 MiB).
        self.part_bytes = part_bytes
        self.prefix = f"{prefix}/" if prefix else ""
        config = Config(
            retries={"max_attempts": attempts, "mode": "standard"},
            connect_timeout=min(5.0, timeout),
            read_timeout=timeout,
            s3={"addressing_style": "path"} if (endpoint or os.environ.get("AWS_ENDPOINT_URL")) else None,
        )
        self._client: Any = boto3.session.Session().client(
            "s3",
            endpoint_url=endpoint or os.environ.get("AWS_ENDPOINT_URL") or None,
            region_name=region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None,
            config=config,
        )
        from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

        self._client_error: type[Exception] = ClientError
        self._transport_error: type[Exception] = BotoCoreError

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _fail(self, what: str, exc: Exception) -> Exception:
        if isinstance(exc, self._client_error):
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if code in _PRECONDITION_CODES:
                return PreconditionFailed(f"{self.url}: {what}: {code}")
        return StoreUnavailable(f"{self.url}: {what}: {exc}")

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        extra: dict[str, str] = {}
        if if_none_match:
            extra["IfNoneMatch"] = "*"
        if if_match is not None:
            extra["IfMatch"] = if_match
        try:
            answer = self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **extra)
        except (self._client_error, self._transport_error) as exc:
            raise self._fail(f"writing {key}", exc) from exc
        return str(answer["ETag"])

    def _get_object(self, key: str) -> Any:
        """GetObject's answer (its body not read yet), or None if there is no such object."""
        try:
            return self._client.get_object(Bucket=self.bucket, Key=self._key(key))
        except self._client_error as exc:
            if str(getattr(exc, "response", {}).get("Error", {}).get("Code", "")) in _MISSING_CODES:
                return None
            raise self._fail(f"reading {key}", exc) from exc
        except self._transport_error as exc:
            raise self._fail(f"reading {key}", exc) from exc

    def get(self, key: str) -> tuple[bytes, str] | None:
        answer = self._get_object(key)
        if answer is None:
            return None
        try:
            data = answer["Body"].read()
        except (self._client_error, self._transport_error, OSError) as exc:
            raise self._fail(f"reading {key}", exc) from exc
        return bytes(data), str(answer["ETag"])

    def put_file(self, key: str, source: BinaryIO, size: int, *, if_none_match: bool = False) -> str:
        """One PutObject up to `part_bytes`; above, a multipart upload, one part in memory at a time.

        The object appears only at CompleteMultipartUpload (conditional like a put), so a failed or
        abandoned upload leaves no partial object under `key`; its parts are aborted.
        """
        if size <= self.part_bytes:
            return self.put(key, b"".join(chunks(source, size)), if_none_match=if_none_match)
        try:
            upload = self._client.create_multipart_upload(Bucket=self.bucket, Key=self._key(key))["UploadId"]
        except (self._client_error, self._transport_error) as exc:
            raise self._fail(f"writing {key}", exc) from exc
        try:
            parts = []
            for number, piece in enumerate(chunks(source, size, self.part_bytes), start=1):
                answer = self._client.upload_part(
                    Bucket=self.bucket, Key=self._key(key), UploadId=upload, PartNumber=number, Body=piece
                )
                parts.append({"PartNumber": number, "ETag": answer["ETag"]})
                del piece, answer
            extra = {"IfNoneMatch": "*"} if if_none_match else {}
            answer = self._client.complete_multipart_upload(
                Bucket=self.bucket, Key=self._key(key), UploadId=upload, MultipartUpload={"Parts": parts}, **extra
            )
        except (self._client_error, self._transport_error, OSError) as exc:  # OSError: the source fell short
            self._abort(key, upload)
            raise self._fail(f"writing {key}", exc) from exc
        except BaseException:
            self._abort(key, upload)
            raise
        return str(answer["ETag"])

    def _abort(self, key: str, upload: str) -> None:
        """Drop an unfinished upload's parts (best effort: a bucket lifecycle rule takes what this misses)."""
        try:
            self._client.abort_multipart_upload(Bucket=self.bucket, Key=self._key(key), UploadId=upload)
        except (self._client_error, self._transport_error):
            pass

    def read_into(self, key: str, sink: Callable[[bytes], object]) -> bool:
        """GetObject's body read piece by piece into `sink` (whose own failure is not the store's)."""
        answer = self._get_object(key)
        if answer is None:
            return False
        with answer["Body"] as body:
            while True:
                try:
                    piece = body.read(CHUNK_BYTES)
                except (self._client_error, self._transport_error, OSError) as exc:
                    raise self._fail(f"reading {key}", exc) from exc
                if not piece:
                    return True
                sink(piece)

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix
            )
            for page in pages:
                keys.extend(item["Key"][len(self.prefix) :] for item in page.get("Contents", ()))
        except (self._client_error, self._transport_error) as exc:
            raise self._fail(f"listing {prefix!r}", exc) from exc
        return sorted(keys)

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (self._client_error, self._transport_error) as exc:
            raise self._fail(f"deleting {key}", exc) from exc
