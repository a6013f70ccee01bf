# Hostile peers of the shm transport and its listener (docs/security.md).
actorpipe_add_test(NAME hostile_shm_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/shm_test.cc LIBS actorpipe_test_support TIMEOUT 120)
