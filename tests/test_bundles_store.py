"""Two owners share, a third ingests into a real PostgreSQL (tests/fixtures_postgres.py): the shared index. Alice's
bundle is re-derived; Bob's of the same spec, image and hardware agrees, and both become reproduced; Carol's, 1.5x
faster, does not reproduce them; a tampered bundle is refused in one line and writes nothing."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from agent.cli import main
from agent.store import db, select
from agent.store.schema import bundles, cells, hosts
from tests import bundle_fixtures as bf

pytestmark = pytest.mark.integration


@pytest.mark.attack("store ingest of a tampered bundle writes rows")
def test_owners_share_another_ingests_and_the_tier_rises_to_reproduced(postgres, tmp_path, capsys, monkeypatch):
    url = postgres.create_database("bundles")
    monkeypatch.setenv(db.ENV_URL, url)
    keys = {name: bf.key(tmp_path, name) for name in ("alice", "bob", "carol")}
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("".join(k.with_suffix(".allowed").read_text() for k in keys.values()))
    made = {
        "alice": bf.share(bf.results(tmp_path / "a"), keys["alice"], tmp_path / "alice.tgz"),
        "bob": bf.share(bf.results(tmp_path / "b", host="spark-b"), keys["bob"], tmp_path / "bob.tgz"),
        "carol": bf.share(bf.results(tmp_path / "c", host="spark-c", scale=1.5), keys["carol"], tmp_path / "c.tgz"),
    }
    files = bf.members(made["bob"])
    files[f"tree/{bf.SWEEP}/spark-b/8138d5d16072/server.log"] += b"INFO Using MARLIN Fp8 MoE backend\n"
    tampered = bf.repack(files, tmp_path / "tampered.tgz")

    def ingest(bundle) -> str:  # type: ignore[no-untyped-def]
        code = main(["store", "ingest", str(bundle), "--allowed-signers", str(allowed)])
        return f"{code} {capsys.readouterr().out.strip()}"

    assert ingest(made["alice"]).startswith("0 ") and "tier re-derived, signed by alice@example" in ingest(
        made["alice"]
    )
    said = ingest(made["bob"])
    assert said.startswith("0 ") and "tier reproduced, signed by bob@example; reproduced by alice@example" in said
    said = ingest(tampered)
    assert said.startswith("1 ") and len(said.splitlines()) == 1 and "refused, tier none: hashes: " in said, said
    said = ingest(made["carol"])
    assert "tier re-derived, signed by carol@example" in said and "reproduced by" not in said, said

    engine = db.open_store(url)
    with engine.connect() as conn:
        rows = {r.signer: r for r in conn.execute(sa.select(bundles))}
        assert {s: (r.tier, r.reproduced_by) for s, r in rows.items()} == {
            "alice@example": ("reproduced", ["bob@example"]),
            "bob@example": ("reproduced", ["alice@example"]),
            "carol@example": ("re-derived", []),
        }
        assert any("not reproduced by alice@example" in x for x in rows["carol@example"].reasons)
        assert rows["alice@example"].content == made["alice"].read_bytes()  # the bundle itself is kept
        names = sorted(conn.execute(sa.select(hosts.c.name)).scalars())
        sources = list(conn.execute(sa.select(cells.c.source)).scalars())
    assert names == ["h200@alice@example", "spark-b@bob@example", "spark-c@carol@example"]  # tampered: none
    assert all(s.startswith("bundle:") and "/tmp" not in s for s in sources) and len(sources) == 6
    # two owners' cells are two hosts of one group: the store reads them back as a tree's cells
    stored = select.load(engine, select.parse(["host=spark-b@bob@example"]))
    assert len(stored) == 2 and {c["facts"]["fingerprint"] for c in stored} == {"2418f3cd"}
    # history shows each row's evidence: the tier and signer of a shared bundle ("own" for a team's tree)
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "300")  # one line per row
    assert main(["history", "host=spark-c@carol@example"]) == 0
    shown = capsys.readouterr().out
    assert "re-derived, signed by" in shown and "carol@example" in shown, shown
