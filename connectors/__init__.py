"""Sources of documents: connectors list and fetch, the scanner turns listings into events."""

from connectors.base import ContentMeta, SourceConnector, SourceDocument, content_metadata
from connectors.drive import DriveConnector, Manifest, load_manifest, resolve_access
from connectors.scan import ScanReport, scan
from connectors.state import ConnectorState, DocRecord

__all__ = [
    "ConnectorState",
    "ContentMeta",
    "DocRecord",
    "DriveConnector",
    "Manifest",
    "ScanReport",
    "SourceConnector",
    "SourceDocument",
    "content_metadata",
    "load_manifest",
    "resolve_access",
    "scan",
]
