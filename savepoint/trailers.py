"""The Java-serialized ``CheckpointProperties`` that metadata V4+ ends with.

These are data, captured byte for byte from files written by Flink 2.3.0 (the trailer of a
canonical stop-with-savepoint ``_metadata`` and of a retained checkpoint ``chk-N/_metadata``).
Writers append the one that matches what they write; Flink reads it back with Java
deserialization, so its bytes must be exactly Flink's.
"""

from __future__ import annotations

import base64

_CANONICAL_SAVEPOINT = (
    "rO0ABXNyADhvcmcuYXBhY2hlLmZsaW5rLnJ1bnRpbWUuY2hlY2twb2ludC5DaGVja3BvaW50UHJvcGVydGllcwAAAAAAAAAC"
    "AgAIWgAQZGlzY2FyZENhbmNlbGxlZFoADWRpc2NhcmRGYWlsZWRaAA9kaXNjYXJkRmluaXNoZWRaAA9kaXNjYXJkU3Vic3Vt"
    "ZWRaABBkaXNjYXJkU3VzcGVuZGVkWgAGZm9yY2VkWgAJdW5jbGFpbWVkTAAOY2hlY2twb2ludFR5cGV0ADJMb3JnL2FwYWNo"
    "ZS9mbGluay9ydW50aW1lL2NoZWNrcG9pbnQvU25hcHNob3RUeXBlO3hwAAAAAAABAHNyADFvcmcuYXBhY2hlLmZsaW5rLnJ1"
    "bnRpbWUuY2hlY2twb2ludC5TYXZlcG9pbnRUeXBloIfTCKRYFLgCAANMAApmb3JtYXRUeXBldAA1TG9yZy9hcGFjaGUvZmxp"
    "bmsvY29yZS9leGVjdXRpb24vU2F2ZXBvaW50Rm9ybWF0VHlwZTtMAARuYW1ldAASTGphdmEvbGFuZy9TdHJpbmc7TAAUcG9z"
    "dENoZWNrcG9pbnRBY3Rpb250AEhMb3JnL2FwYWNoZS9mbGluay9ydW50aW1lL2NoZWNrcG9pbnQvU2F2ZXBvaW50VHlwZSRQ"
    "b3N0Q2hlY2twb2ludEFjdGlvbjt4cH5yADNvcmcuYXBhY2hlLmZsaW5rLmNvcmUuZXhlY3V0aW9uLlNhdmVwb2ludEZvcm1h"
    "dFR5cGUAAAAAAAAAABIAAHhyAA5qYXZhLmxhbmcuRW51bQAAAAAAAAAAEgAAeHB0AAlDQU5PTklDQUx0ABFTdXNwZW5kIFNh"
    "dmVwb2ludH5yAEZvcmcuYXBhY2hlLmZsaW5rLnJ1bnRpbWUuY2hlY2twb2ludC5TYXZlcG9pbnRUeXBlJFBvc3RDaGVja3Bv"
    "aW50QWN0aW9uAAAAAAAAAAASAAB4cQB+AAl0AAdTVVNQRU5E"
)

_CHECKPOINT = (
    "rO0ABXNyADhvcmcuYXBhY2hlLmZsaW5rLnJ1bnRpbWUuY2hlY2twb2ludC5DaGVja3BvaW50UHJvcGVydGllcwAAAAAAAAAC"
    "AgAIWgAQZGlzY2FyZENhbmNlbGxlZFoADWRpc2NhcmRGYWlsZWRaAA9kaXNjYXJkRmluaXNoZWRaAA9kaXNjYXJkU3Vic3Vt"
    "ZWRaABBkaXNjYXJkU3VzcGVuZGVkWgAGZm9yY2VkWgAJdW5jbGFpbWVkTAAOY2hlY2twb2ludFR5cGV0ADJMb3JnL2FwYWNo"
    "ZS9mbGluay9ydW50aW1lL2NoZWNrcG9pbnQvU25hcHNob3RUeXBlO3hwAAABAQAAAHNyADJvcmcuYXBhY2hlLmZsaW5rLnJ1"
    "bnRpbWUuY2hlY2twb2ludC5DaGVja3BvaW50VHlwZdbeTwMFrh06AgACTAAEbmFtZXQAEkxqYXZhL2xhbmcvU3RyaW5nO0wA"
    "FHNoYXJpbmdGaWxlc1N0cmF0ZWd5dABHTG9yZy9hcGFjaGUvZmxpbmsvcnVudGltZS9jaGVja3BvaW50L1NuYXBzaG90VHlw"
    "ZSRTaGFyaW5nRmlsZXNTdHJhdGVneTt4cHQACkNoZWNrcG9pbnR+cgBFb3JnLmFwYWNoZS5mbGluay5ydW50aW1lLmNoZWNr"
    "cG9pbnQuU25hcHNob3RUeXBlJFNoYXJpbmdGaWxlc1N0cmF0ZWd5AAAAAAAAAAASAAB4cgAOamF2YS5sYW5nLkVudW0AAAAA"
    "AAAAABIAAHhwdAAQRk9SV0FSRF9CQUNLV0FSRA=="
)

#: SavepointType(CANONICAL, "Suspend Savepoint", SUSPEND), forced
CANONICAL_SAVEPOINT_PROPERTIES: bytes = base64.b64decode(_CANONICAL_SAVEPOINT)
#: CheckpointType("Checkpoint", FORWARD_BACKWARD), discard on finished/subsumed
CHECKPOINT_PROPERTIES: bytes = base64.b64decode(_CHECKPOINT)
