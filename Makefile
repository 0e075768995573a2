.PHONY: demo test test-quick lint bench

demo:  ## the main job on embedded defaults
	bash scripts/demo.sh

test:  ## the whole test suite (what CI runs)
	bash scripts/test.sh

test-quick:  ## the everyday tier: unit and fast integration tests (no slow or end-to-end ones)
	REELRL_TEST_TIER=quick bash scripts/test.sh

lint:
	bash -c 'venv=$$(scripts/bootstrap.sh) && $$venv/bin/ruff check services tests bench && $$venv/bin/ruff format --check services tests bench'
