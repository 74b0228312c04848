"""The parts of bench/soak.py: the server under test, the client behaviours, the phases, the report.

Stdlib plus httpx (the well-behaved clients use a real HTTP client); run with the repo's .venv.
"""
