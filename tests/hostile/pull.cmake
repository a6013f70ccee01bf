actorpipe_add_test(NAME hostile_pull_test SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/pull_test.cc
  LIBS actorpipe_test_support TIMEOUT 120)
