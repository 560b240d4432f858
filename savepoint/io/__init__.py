"""The IO seam: every file fstate reads or writes goes through a :class:`FileIO`.

``io_for(path, options)`` is the single entry point. Local paths and ``file:`` URIs are served by
:class:`LocalFileIO`; ``s3://`` (and Flink's spellings ``s3a://``, ``s3p://``, ``s3n://``),
``gs://`` and ``hdfs://`` by :class:`RemoteFileIO` over ``pyarrow.fs`` (S3FileSystem,
GcsFileSystem, HadoopFileSystem where pyarrow supports them on the machine).

File-system options (endpoint, region, path-style access, credentials, retries) come from, later
ones winning: the YAML file named by ``FSTATE_FS_CONFIG``, ``FSTATE_FS_OPTIONS`` (``k=v,k=v`` or a
JSON object), the process defaults (:func:`set_default_fs_options`, set by the CLI's
``--fs-option``/``--fs-config``), and the options given to a call (``fs_options=`` of the Python API).
Credentials otherwise come from where the cloud SDKs look (AWS environment variables, profile
files, instance metadata). Options travel with the work: a :class:`~..handles.StreamSource` carries
them to the Spark executor that opens the file, so executors need no configuration of their own.

Remote errors become :class:`~..errors.StorageError` (or MissingStateFileError) naming the URI;
throttling, network failures and server errors are retried with backoff first.

Modules, bottom up: ``uri`` (paths and URIs), ``options`` (option names and their three channels),
``base`` (the FileIO interface), ``local``, ``classify`` (what a remote error means),
``filesystems`` (pyarrow file systems from options), ``remote``, ``access`` (``io_for``, byte-range
copies) and ``locate`` (a savepoint's directory and ``_metadata``).
"""

from ..errors import StorageError
from .access import COPY_CHUNK, copy_range, io_for, iter_chunks
from .base import FileIO
from .classify import aws_credentials_apparent, classify_error
from .local import LocalFileIO
from .locate import METADATA_FILE, SavepointLocation, locate
from .options import (FS_CONFIG_ENV, FS_OPTIONS_ENV, KNOWN_OPTIONS, FsOptions, canonical_option, default_fs_options,
                      describe_options, load_fs_config, normalize_fs_options, options_for, parse_fs_option_args,
                      resolve_fs_options, set_default_fs_options)
from .remote import RemoteFileIO
from .uri import (FAMILIES, canonical, family_of, is_remote, is_within, join, parent_of, scheme_of, split_uri,
                  strip_file_scheme)

__all__ = [
    # files
    "FileIO", "LocalFileIO", "RemoteFileIO", "io_for", "copy_range", "iter_chunks", "COPY_CHUNK",
    # savepoints
    "locate", "SavepointLocation", "METADATA_FILE",
    # paths and URIs
    "strip_file_scheme", "scheme_of", "is_remote", "family_of", "split_uri", "join", "parent_of", "is_within",
    "canonical", "FAMILIES",
    # options
    "FsOptions", "KNOWN_OPTIONS", "FS_OPTIONS_ENV", "FS_CONFIG_ENV", "canonical_option", "normalize_fs_options",
    "parse_fs_option_args", "load_fs_config", "set_default_fs_options", "default_fs_options", "resolve_fs_options",
    "options_for",
    "describe_options",
    # errors
    "classify_error", "aws_credentials_apparent", "StorageError",
]
