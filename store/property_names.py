"""The names of the message properties the broker itself reads (RocketMQ's MessageConst).

Apart from the record format (store/record.py) so that the gateway can name a property without
importing the bytes of a record.
"""

from __future__ import annotations

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
