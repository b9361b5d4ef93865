"""group fifo: a subscription group whose topics' queues are each delivered in order (false)

Revision ID: 9a3f6b2d4e17
Revises: 7c4d2e91a5b3
Create Date: 2026-11-28 17:45:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '9a3f6b2d4e17'
down_revision: str | None = '7c4d2e91a5b3'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN (a constant default makes NOT NULL allowed on SQLite too): batch mode
    # rebuilt the table for a Boolean, and the rebuilt table's CHECK constraints came out in
    # an order that varied from one process to the next.
    op.add_column('subscription_group', sa.Column('fifo', sa.Boolean(),
                                                  server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('subscription_group') as batch:
        batch.drop_column('fifo')
